// Ops console: a refused configuration reload as a banner on top; one row per project (what is in
// CI, what waits, what is blocked or paused; BLOCKED and failed first); each project's merge
// train (cars, members, pipelines, what waits → pause, resume, merge next), what needs attention
// (stuck requests → retry), batches with their members as they ended there and links (BLOCKED,
// then active, then history → settle), the manual round and reconciliation, per-stage latency at
// a glance, the effective configuration and its errors, and the audit log. Every section loads
// and fails on its own, so one broken endpoint never blanks the console.
import {h, swap, loading, empty, errorBox, externalLink, describeError, busyReading} from '../dom.js';
import {get, post, qs, newOperationId} from '../api.js';
import {poll, liveIndicator} from '../poll.js';
import {batchBadge, statusBadge, stageName, stepName, duration, since, time, roundOutcome, keySource, auditAction, paramList, pipelineBadge, plural} from '../format.js';
import {requestTable} from './requests.js';

const STATUSES = ['APPROVAL_SENDING', 'APPROVAL_SENT', 'MR_CREATING', 'MR_CREATED', 'MERGING', 'MERGED', 'VALIDATED', 'CREATE_FAILED', 'HANDLE_FAILED', 'REJECTED', 'CLOSED'];

export function mount(root, ctx) {
  ctx.title('Ops console');
  if (!ctx.me.ops) {
    root.append(h('h1', {}, 'Ops console'), h('p', {}, 'This page is for operators. You are signed in as ', h('strong', {}, ctx.me.displayName || ctx.me.identity), '.'));
    return null;
  }
  const stops = [];
  const notices = h('div', {class: 'notices', 'aria-live': 'polite'});
  // A refused reload of the configuration leaves the previous one in force silently: it is said
  // first, above everything (the configuration section below has the details).
  const configBanner = h('div', {id: 'config-banner'});
  root.append(h('h1', {}, 'Ops console'), configBanner, notices);

  // A notice says when it was told: a few of them stay, and "done" means little without a time.
  function tell(tone, ...text) {
    const close = h('button', {type: 'button', class: 'link', 'aria-label': 'Dismiss'}, '×');
    const n = h('div', {class: `notice tone-${tone}`, role: tone === 'bad' ? 'alert' : 'status'},
      h('p', {}, h('span', {class: 'notice-time muted small'}, time(new Date().toISOString()), ' '), ...text), close);
    close.addEventListener('click', () => n.remove());
    notices.prepend(n);
    while (notices.children.length > 3) notices.lastChild.remove();
  }

  // ---- projects at a glance ----
  const glance = section(root, 'projects', 'Projects at a glance', true);

  // ---- merge trains ----
  const trains = section(root, 'trains', 'Merge trains', true);
  // The pause's dialog stays outside the regions the live refresh redraws, and the refresh waits
  // while it is open.
  const pauseDialog = h('dialog', {id: 'pause-dialog', 'aria-labelledby': 'pause-title'});
  root.append(pauseDialog);
  const trainsPoll = poll(() => get('/api/ops/trains'), (page) => {
    trains.live.ok();
    glance.live.ok();
    const items = (page && page.items) || [];
    if (!busyReading(glance.body)) swap(glance.body, items.length ? projectTable(items) : empty(h('p', {}, 'No project in the catalog yet.')));
    if (busyReading(trains.body) || pauseDialog.open) return;
    swap(trains.body, items.length ? h('ul', {class: 'trains'}, items.map(trainItem)) : empty(h('p', {}, 'No project in the catalog yet.')));
  }, (err) => {
    trains.live.failed();
    glance.live.failed();
    swap(glance.body, errorBox(err, () => trainsPoll.now()));
    swap(trains.body, errorBox(err, () => trainsPoll.now()));
  }, 3000);
  stops.push(trainsPoll.stop);

  // One row per project, what needs an operator first: a BLOCKED car, a failed pipeline, a pause;
  // then the projects with work, then the idle ones (docs/operations.md, 'The console at a glance').
  function projectTable(items) {
    const rows = [...items].sort((a, b) => glanceRank(a) - glanceRank(b));
    return h('div', {class: 'table-scroll'}, h('table', {class: 'list glance'},
      h('thead', {}, h('tr', {}, ['Project', 'In CI', 'Waiting', 'Blocked', 'Paused'].map((c) => h('th', {scope: 'col'}, c)))),
      h('tbody', {}, rows.map((t) => {
        const cars = t.cars || [];
        const failed = cars.filter((c) => c.pipelineState === 'failed').length;
        return h('tr', {'data-glance': t.project, class: t.blocked || failed || t.failed ? 'row-bad' : t.paused ? 'row-warn' : null},
          h('td', {'data-label': 'Project'}, h('strong', {}, t.project),
            t.blocked ? [' ', h('span', {class: 'badge tone-bad'}, 'BLOCKED')] : null,
            failed ? [' ', h('span', {class: 'badge tone-bad'}, `${failed} failed`)] : null,
            // Its newest batch failed: its requests just failed, though nothing of it is in CI.
            t.failed ? h('span', {class: 'small block', 'data-glance-failed': t.failed.batchId}, h('span', {class: 'badge tone-bad'}, 'last batch failed'), ' ',
              h('a', {href: `#batch-${t.failed.batchId}`}, `Batch #${t.failed.batchId}`), ', ', time(t.failed.since), ': ', t.failed.why) : null),
          h('td', {'data-label': 'In CI'}, cars.length
            ? h('ul', {class: 'glance-cars'}, cars.map((c) => h('li', {'data-glance-car': c.batchId},
              h('a', {href: `#batch-${c.batchId}`}, `Batch #${c.batchId}`), ' ', h('span', {class: 'muted small'}, `car ${c.position} of ${cars.length}, for ${since(c.since)}`), ' ',
              pipelineBadge(c.pipelineState), c.pipeline ? [' ', externalLink(c.pipeline.url, `Pipeline #${c.pipeline.id}`)] : null)))
            : h('span', {class: 'muted'}, 'nothing in CI')),
          h('td', {'data-label': 'Waiting', 'data-waiting': t.waiting}, t.waiting ? `${t.waiting}${t.mergeNext ? ` (${t.mergeNext} sent next)` : ''}` : h('span', {class: 'muted'}, 'none')),
          h('td', {'data-label': 'Blocked'}, t.blocked
            ? [h('a', {href: `#batch-${t.blocked.batchId}`}, `Batch #${t.blocked.batchId}`), ' since ', time(t.blocked.since), h('span', {class: 'small block'}, t.blocked.why)]
            : h('span', {class: 'muted'}, '—')),
          h('td', {'data-label': 'Paused'}, t.paused
            ? [`by ${t.paused.by} since `, time(t.paused.since), h('span', {class: 'small block'}, t.paused.reason)]
            : h('span', {class: 'muted'}, '—')));
      }))));
  }

  // One project's train: what holds it first (a pause, a BLOCKED car), then its cars in the order
  // they merge, then what waits for a car.
  function trainItem(t) {
    const cars = t.cars || [];
    const queue = t.queue || [];
    const steer = t.paused
      ? h('button', {type: 'button', 'data-focus': `resume-${t.project}`, 'data-resume': t.project}, 'Resume', h('span', {class: 'sr-only'}, ` the queue of ${t.project}`))
      : h('button', {type: 'button', 'data-focus': `pause-${t.project}`, 'data-pause': t.project}, 'Pause…', h('span', {class: 'sr-only'}, ` the queue of ${t.project}`));
    if (t.paused) {
      steer.addEventListener('click', () => act(steer, 'Resuming…', () => post('/api/ops/trains/resume', {operationId: newOperationId(), project: t.project}), () => {
        tell('ok', `The queue of ${t.project} runs again: its cars merge and the next round claims.`);
        trainsPoll.now();
      }));
    } else {
      steer.addEventListener('click', () => askPause(t.project));
    }
    return h('li', {class: `card train${t.blocked ? ' tone-bad' : t.paused ? ' tone-warn' : ''}`, 'data-project': t.project},
      h('div', {class: 'batch-head'},
        h('h3', {}, t.project),
        t.blocked ? h('span', {class: 'badge tone-bad'}, 'BLOCKED') : null,
        t.paused ? h('span', {class: 'badge tone-warn'}, 'Paused') : null,
        h('span', {class: 'muted small', 'data-cars': cars.length}, `${cars.length} of ${t.length} car${t.length === 1 ? '' : 's'} in the train`),
        h('span', {class: 'muted small'}, t.waiting ? `${t.waiting} waiting for a car${t.mergeNext ? ` (${t.mergeNext} sent next)` : ''}` : 'nothing waiting'),
        steer),
      t.paused ? h('div', {class: 'notice tone-warn small', role: 'status', 'data-paused': t.project},
        h('p', {}, h('strong', {}, `Paused by ${t.paused.by}`), ' since ', time(t.paused.since), `: ${t.paused.reason}`),
        h('p', {class: 'muted'}, 'No car is claimed and none merges until the queue is resumed; the cars in CI finish their pipelines. Every waiting requester reads this reason.')) : null,
      t.blocked ? h('div', {class: 'notice tone-bad small', role: 'status', 'data-blocked': t.blocked.batchId},
        h('p', {}, h('strong', {}, `Batch #${t.blocked.batchId} is blocked`), ' since ', time(t.blocked.since), `: ${t.blocked.why}`),
        h('p', {class: 'muted'}, 'The cars behind it cannot merge before it. Settle or retry it in the batch list below.')) : null,
      cars.length ? h('ol', {class: 'cars'}, cars.map((c) => carItem(t, c))) : h('p', {class: 'muted small'}, 'No car in CI.'),
      queue.length ? h('div', {class: 'queue'},
        h('p', {class: 'small'}, h('strong', {}, 'Waiting for a car'), t.waiting > queue.length ? ` (the first ${queue.length} of ${t.waiting})` : ''),
        h('ul', {class: 'members'}, queue.map((q) => queueItem(t, q)))) : null,
      t.pipelines ? h('p', {class: 'muted small'}, `Estimates: ${t.pipelines}.`) : null);
  }

  function carItem(t, c) {
    const members = c.members || [];
    return h('li', {'data-car': c.batchId, 'data-pipeline': c.pipelineState},
      h('div', {class: 'batch-head'},
        h('strong', {}, `Car ${c.position} of ${(t.cars || []).length}`),
        h('span', {}, `Batch #${c.batchId}`), batchBadge(c.status), pipelineBadge(c.pipelineState),
        c.mr ? externalLink(c.mr.url, `MR !${c.mr.id}`) : null,
        c.pipeline ? externalLink(c.pipeline.url, `Pipeline #${c.pipeline.id}`) : null,
        h('span', {class: 'muted small'}, 'claimed ', time(c.since), c.ciSince ? [', pipeline since ', time(c.ciSince)] : null),
        c.estimate ? h('span', {class: 'small', title: c.estimate.basis, 'data-estimate': c.batchId}, `merges: ${c.estimate.words}`) : null),
      c.waitingFor ? h('p', {class: 'small muted', 'data-car-waiting': c.batchId}, c.waitingFor.charAt(0).toUpperCase() + c.waitingFor.slice(1)) : null,
      h('ul', {class: 'members'}, members.map((m) => h('li', {},
        h('a', {href: `/requests/${encodeURIComponent(m.operationId)}`}, m.targetKey), ' ', h('span', {class: 'muted'}, m.subject), ' ', statusBadge(m.status)))));
  }

  // A waiting request: sent into the next car already, or a button that sends it there.
  function queueItem(t, q) {
    let next;
    if (q.nextBy) {
      next = h('span', {class: 'badge tone-busy', 'data-sent-next': q.operationId}, `next car: sent by ${q.nextBy}`);
    } else {
      next = h('button', {type: 'button', 'data-focus': `next-${q.operationId}`, 'data-merge-next': q.operationId}, 'Merge next',
        h('span', {class: 'sr-only'}, ` ${q.targetKey} for ${q.subject}`));
      next.addEventListener('click', () => act(next, 'Sending…', () => post(`/api/ops/requests/${encodeURIComponent(q.operationId)}/next`, {operationId: newOperationId()}), () => {
        tell('ok', h('a', {href: `/requests/${encodeURIComponent(q.operationId)}`}, `${q.targetKey} (${q.subject})`), ` goes into the next car of ${t.project}, ahead of the queue.`);
        trainsPoll.now();
      }));
    }
    return h('li', {'data-queued': q.operationId},
      h('a', {href: `/requests/${encodeURIComponent(q.operationId)}`}, q.targetKey), ' ', h('span', {class: 'muted'}, q.subject), ' ',
      h('span', {class: 'muted small'}, 'waiting since ', time(q.since)), ' ', next);
  }

  // The pause asks for the reason every waiting requester will read.
  function askPause(project) {
    const operationId = newOperationId(); // one form, one action: a resend after an error is the same one
    const reason = h('textarea', {id: 'pause-reason', rows: '3', maxlength: '512', 'aria-required': 'true', 'aria-describedby': 'pause-hint pause-error'});
    const error = h('p', {class: 'field-error', id: 'pause-error', role: 'alert'});
    const yes = h('button', {type: 'submit', class: 'primary', id: 'pause-confirm'}, 'Pause the queue');
    const no = h('button', {type: 'button', id: 'pause-cancel'}, 'Cancel');
    const form = h('form', {method: 'dialog'},
      h('h2', {id: 'pause-title'}, `Pause the queue of ${project}?`),
      h('p', {}, 'No new car is claimed and no car merges until the queue is resumed; the cars in CI finish their pipelines.'),
      h('div', {class: 'field'}, h('label', {for: 'pause-reason'}, 'Reason'),
        h('p', {class: 'hint', id: 'pause-hint'}, 'Every requester waiting for this project reads it, e.g. “release freeze until 18:00”. At most 512 characters.'),
        reason, error),
      h('div', {class: 'actions'}, yes, no));
    no.addEventListener('click', () => pauseDialog.close());
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      if (!reason.value.trim()) {
        error.textContent = 'Say why: every waiting requester reads it.';
        reason.focus();
        return;
      }
      yes.disabled = true;
      try {
        await post('/api/ops/trains/pause', {operationId, project, reason: reason.value});
        pauseDialog.close();
        tell('ok', `The queue of ${project} is paused: ${reason.value.trim()}`);
        trainsPoll.now();
      } catch (err) {
        error.textContent = describeError(err);
      } finally {
        yes.disabled = false;
      }
    });
    swap(pauseDialog, form);
    pauseDialog.showModal();
    reason.focus();
  }

  // ---- actions ----
  const actions = section(root, 'actions', 'Actions', false);
  const roundBtn = h('button', {type: 'button', class: 'primary', id: 'run-round', 'data-focus': 'run-round'}, 'Run a batch round now');
  const reconcileBtn = h('button', {type: 'button', id: 'run-reconcile', 'data-focus': 'run-reconcile'}, 'Reconcile now');
  swap(actions.body,
    h('p', {class: 'muted'}, 'The round is the same code the cron runs: it claims the waiting requests of each project into a batch. Reconciliation validates merged requests whose deploy callback was lost.'),
    h('div', {class: 'actions'}, roundBtn, reconcileBtn));
  roundBtn.addEventListener('click', () => act(roundBtn, 'Running…', () => post('/api/ops/batches/run', {operationId: newOperationId()}), (r) => {
    const parts = (r && r.partitions) || [];
    tell(parts.some((p) => p.outcome === 'ERROR') ? 'warn' : 'ok', 'Batch round done: ', parts.length ? parts.map(roundOutcome).join('; ') + '.' : 'no project had work.');
    trainsPoll.now();
    batchesPoll.now();
    stuckPoll.now();
  }));
  reconcileBtn.addEventListener('click', () => act(reconcileBtn, 'Reconciling…', () => post('/api/ops/reconcile', {operationId: newOperationId()}), (r) => {
    tell('ok', `Reconciliation done: scanned ${(r && r.scanned) || 0}, validated ${(r && r.validated) || 0}, removals closed ${(r && r.closed) || 0}.`);
    stuckPoll.now();
  }));

  async function act(button, busyText, call, done) {
    const label = [...button.childNodes];
    button.disabled = true;
    button.textContent = busyText;
    try {
      const {data} = await call();
      done(data);
      dispatchEvent(new Event('bindery:attention')); // the navigation's count (main.js)
    } catch (err) {
      tell('bad', describeError(err));
    } finally {
      button.disabled = false;
      button.replaceChildren(...label);
    }
  }

  // Which <details> the reader opened survives the live refreshes.
  const opened = new Map();
  function remembered(key, openByDefault, ...children) {
    const d = h('details', {open: opened.has(key) ? opened.get(key) : openByDefault}, ...children);
    d.addEventListener('toggle', () => opened.set(key, d.open));
    return d;
  }

  // ---- requests needing attention ----
  const stuck = section(root, 'stuck', 'Requests needing attention', true);
  const statusSel = h('select', {id: 'stuck-status'}, h('option', {value: ''}, 'Stuck or failed (default)'), STATUSES.map((s) => h('option', {value: s}, s)));
  const stepInput = h('input', {id: 'stuck-step', type: 'text', inputmode: 'numeric', placeholder: 'e.g. 10501', size: '8'});
  const filters = h('form', {class: 'filters', role: 'search'},
    h('label', {for: 'stuck-status'}, 'Status '), statusSel,
    h('label', {for: 'stuck-step'}, ' Step '), stepInput,
    h('button', {type: 'submit'}, 'Filter'));
  filters.addEventListener('submit', (e) => {
    e.preventDefault();
    swap(stuckList, loading('requests'));
    stuckPoll.now();
  });
  const stuckList = h('div', {});
  swap(stuck.body, filters, stuckList);
  const stuckPoll = poll(() => get(`/api/ops/requests${qs({status: statusSel.value, step: stepInput.value.trim()})}`), (page) => {
    stuck.live.ok();
    if (busyReading(stuckList)) return;
    const items = (page && page.items) || [];
    swap(stuckList, items.length ? requestTable(items, {showSubject: true, forOps: true, actions: (r) => r.blocker ? blockedActions(r.blocker) : [retryButton(r), r.withdrawable ? withdrawButton(r) : null]})
      : empty(h('p', {}, 'Nothing is stuck. Every request is moving or finished.')));
  }, (err) => {
    stuck.live.failed();
    swap(stuckList, errorBox(err, () => stuckPoll.now()));
  }, 3000);
  stops.push(stuckPoll.stop);

  // ---- drift (docs/drift.md) ----
  // What the drift check found in the config repository against the bindings bindery holds, the
  // open findings first with their repairs: restore (bindery wins, through a batch), accept (the
  // repository wins), ignore with a reason. Then adopting the files already there (import).
  const drift = section(root, 'drift', 'Drift', true);
  const ignoreDialog = h('dialog', {id: 'drift-ignore', 'aria-labelledby': 'drift-ignore-title'});
  root.append(ignoreDialog);
  const driftList = h('div', {});
  const importBox = h('div', {id: 'import'});
  swap(drift.body, h('p', {class: 'muted'}, 'Files of the config repository that differ from the bindings bindery holds: removed (missing), edited (changed), or added by hand (unknown). Nothing in flight is drift.'),
    driftList, importBox);
  const driftPoll = poll(() => get('/api/ops/drift'), (list) => {
    drift.live.ok();
    if (busyReading(driftList) || ignoreDialog.open) return;
    const items = (list && list.items) || [];
    const open = items.filter((f) => f.state === 'open');
    const rest = items.filter((f) => f.state !== 'open');
    swap(driftList,
      open.length ? h('ul', {class: 'drift-list', id: 'drift-open'}, open.map(driftItem)) : empty(h('p', {}, 'Nothing drifts: the repository holds what bindery wrote.')),
      rest.length ? remembered('drift-done', false, h('summary', {}, `${rest.length} closed or ignored`), h('ul', {class: 'drift-list'}, rest.map(driftItem))) : null);
  }, (err) => {
    drift.live.failed();
    swap(driftList, errorBox(err, () => driftPoll.now()));
  }, 5000);
  stops.push(driftPoll.stop);

  function driftItem(f) {
    const restoring = f.restore && ['waiting', 'batched', 'merged'].includes(f.restore.state);
    const tone = f.state !== 'open' ? '' : f.restore && f.restore.state === 'failed' ? ' tone-bad' : restoring ? ' tone-warn' : ' tone-bad';
    const buttons = [];
    if (f.state === 'open') {
      if (f.kind !== 'unknown' && !restoring) buttons.push(driftButton(f, 'restore', 'Restore', 'Restoring…', `Restore asked: bindery writes ${f.path} again through a batch.`));
      if (!restoring) buttons.push(driftButton(f, 'accept', 'Accept', 'Accepting…', f.kind === 'missing' ? `Accepted: the binding of ${f.subject} is closed.` : f.kind === 'changed' ? `Accepted: ${f.path} is the binding's own now.` : `Adopted: ${f.path} is a binding of ${f.subject} in effect.`));
      const ignore = h('button', {type: 'button', 'data-focus': `drift-ignore-${f.id}`, 'data-drift-ignore': f.id}, 'Ignore…', h('span', {class: 'sr-only'}, ` ${f.path}`));
      ignore.addEventListener('click', () => askIgnore(f));
      if (!restoring) buttons.push(ignore);
    }
    return h('li', {class: `card drift${tone}`, 'data-drift-id': f.id, 'data-drift-kind': f.kind, 'data-drift-state': f.state},
      h('div', {class: 'batch-head'},
        h('span', {class: `badge${f.state === 'open' ? ' tone-bad' : ''}`}, f.kind), ' ',
        h('strong', {}, f.targetKey), ' · ', f.subject, ' ',
        h('span', {class: 'muted small'}, `${f.state}, first seen `, time(f.firstSeen), f.state === 'open' ? null : [', last seen ', time(f.lastSeen)])),
      h('p', {}, f.text),
      h('p', {class: 'muted small'}, h('code', {}, f.path), ' in ', f.project, f.operationId ? [' · ', h('a', {href: `/requests/${encodeURIComponent(f.operationId)}`}, 'its request')] : null),
      f.ignoreReason ? h('p', {class: 'small'}, `Ignored: ${f.ignoreReason}`) : null,
      f.restore ? h('p', {class: 'small', 'data-drift-restore': f.restore.state}, f.restore.text) : null,
      buttons.length ? h('div', {class: 'actions'}, buttons) : null);
  }

  function driftButton(f, action, label, busy, done) {
    const b = h('button', {type: 'button', class: action === 'restore' ? 'primary' : null, 'data-focus': `drift-${action}-${f.id}`, [`data-drift-${action}`]: f.id},
      label, h('span', {class: 'sr-only'}, ` ${f.path}`));
    b.addEventListener('click', () => act(b, busy, () => post(`/api/ops/drift/${f.id}/${action}`, {operationId: newOperationId()}), () => {
      tell('ok', done);
      driftPoll.now();
    }));
    return b;
  }

  // Ignoring asks why: the other operators read it, and the finding comes back if the file changes.
  function askIgnore(f) {
    const reason = h('textarea', {id: 'drift-ignore-reason', rows: '3', required: true, maxlength: '512'});
    const yes = h('button', {type: 'submit', class: 'primary', id: 'drift-ignore-yes'}, 'Ignore this finding');
    const no = h('button', {type: 'button', id: 'drift-ignore-no'}, 'Cancel');
    const form = h('form', {method: 'dialog'},
      h('h2', {id: 'drift-ignore-title'}, `Ignore ${f.kind} ${f.path}?`),
      h('p', {}, 'It stays ignored while the file stays as it is now; any other change of the file opens it again.'),
      h('label', {for: 'drift-ignore-reason'}, 'Why (the other operators read it)'), reason,
      h('div', {class: 'actions'}, yes, no));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      if (!reason.value.trim()) return reason.reportValidity();
      ignoreDialog.close();
      act(yes, 'Ignoring…', () => post(`/api/ops/drift/${f.id}/ignore`, {operationId: newOperationId(), reason: reason.value.trim()}), () => {
        tell('ok', `Ignored: ${f.path}.`);
        driftPoll.now();
      });
    });
    no.addEventListener('click', () => ignoreDialog.close());
    swap(ignoreDialog, form);
    ignoreDialog.showModal();
    reason.focus();
  }

  // Import: a dry run lists every file under every target's path template with what it would
  // become; then one step adopts them (docs/drift.md, 'Importing a repository').
  const dryBtn = h('button', {type: 'button', id: 'import-dry-run', 'data-focus': 'import-dry-run'}, 'List the repository\'s files (dry run)');
  const importResult = h('div', {id: 'import-result'});
  swap(importBox, h('h3', {}, 'Adopt the files already in the repository'),
    h('p', {class: 'muted'}, 'Lists every file under every target\'s path template and what it would become; nothing is written until you import.'),
    h('div', {class: 'actions'}, dryBtn), importResult);
  dryBtn.addEventListener('click', () => act(dryBtn, 'Reading the repository…', () => post('/api/ops/import', {operationId: newOperationId(), dryRun: true}), (r) => {
    const items = (r && r.items) || [];
    const adoptable = items.filter((it) => !it.problem && it.becomes && !it.becomes.startsWith('stays')).length;
    const go = h('button', {type: 'button', class: 'primary', id: 'import-run', 'data-focus': 'import-run', disabled: adoptable ? null : true}, `Import ${plural(adoptable, 'file')}`);
    go.addEventListener('click', () => act(go, 'Importing…', () => post('/api/ops/import', {operationId: newOperationId(), dryRun: false}), (res) => {
      tell('ok', `Imported: ${plural((res && res.adopted) || 0, 'binding')} in effect.`);
      swap(importResult);
      driftPoll.now();
    }));
    swap(importResult, items.length ? h('div', {class: 'table-scroll'}, h('table', {class: 'list', id: 'import-items'},
      h('thead', {}, h('tr', {}, ['File', 'Target', 'Subject', 'Expires', 'Becomes'].map((c) => h('th', {scope: 'col'}, c)))),
      h('tbody', {}, items.map((it) => h('tr', {'data-import-path': it.path, class: it.problem ? 'row-bad' : null},
        h('td', {'data-label': 'File'}, h('code', {}, it.path)),
        h('td', {'data-label': 'Target'}, it.targetKey),
        h('td', {'data-label': 'Subject'}, it.subject),
        h('td', {'data-label': 'Expires'}, it.expiresAt ? time(it.expiresAt) : h('span', {class: 'muted'}, '—')),
        h('td', {'data-label': 'Becomes'}, it.problem ? [h('span', {class: 'badge tone-bad'}, 'NOT IMPORTED'), ' ', it.problem] : it.becomes)))))) : empty(h('p', {}, 'No file under any target\'s path template.')),
    h('div', {class: 'actions'}, go));
  }));

  // A merge held for a person: a retry cannot clear it. What helps is the merge request (the
  // person acts there) or settling the batch.
  function blockedActions(bl) {
    return [bl.mr && bl.mr.url ? externalLink(bl.mr.url, `Open MR !${bl.mr.id}`) : null,
      bl.batchId ? settleButton(bl.batchId, true) : null];
  }

  // A merged request is listed when its deploy callback is overdue; its retry confirms the deploy
  // (validates it), so the button says that rather than "Retry". A deterministic failure
  // (CONTACT_SUPPORT: the step table marks the failure as the change's own) is retried only
  // after the operator read what it does: a new merge request that likely fails the same way.
  function retryButton(r) {
    const deploy = r.status === 'MERGED';
    const deterministic = r.nextAction === 'CONTACT_SUPPORT';
    const b = h('button', {type: 'button', 'data-focus': `retry-${r.operationId}`, 'data-retry': r.operationId},
      deploy ? 'Confirm deploy' : deterministic ? 'Retry…' : 'Retry', h('span', {class: 'sr-only'}, ` ${r.targetKey} for ${r.subject}`));
    const go = () => act(b, deploy ? 'Confirming…' : 'Retrying…', () => post(`/api/ops/requests/${encodeURIComponent(r.operationId)}/retry`, {operationId: newOperationId()}), () => {
      tell('ok', deploy ? 'Deploy confirmed for ' : 'Retry started for ', h('a', {href: `/requests/${encodeURIComponent(r.operationId)}`}, `${r.targetKey} (${r.subject})`),
        deterministic ? `: ${retryEffect(r)}` : '', '.');
      stuckPoll.now();
    });
    b.addEventListener('click', () => (deterministic ? confirmRetry(r, go) : go()));
    return b;
  }

  // The confirmation is a modal dialog of the page, outside the regions the live refresh
  // redraws, so a refresh never takes it away mid-decision.
  const dialog = h('dialog', {id: 'retry-confirm', 'aria-labelledby': 'retry-confirm-title'});
  root.append(dialog);
  function confirmRetry(r, go) {
    const newMR = r.flow !== 'legacy';
    const yes = h('button', {type: 'button', class: 'primary', id: 'retry-confirm-yes'}, newMR ? 'Retry: open a new merge request' : 'Retry the merge request');
    const no = h('button', {type: 'button', id: 'retry-confirm-no'}, 'Cancel');
    yes.addEventListener('click', () => { dialog.close(); go(); });
    no.addEventListener('click', () => dialog.close());
    swap(dialog,
      h('h2', {id: 'retry-confirm-title'}, `Retry ${r.targetKey} for ${r.subject}?`),
      h('p', {}, `It stopped at “${stepName(r.step)}”: a failure of the change itself, not of the moment. Retrying alone does not fix it.`),
      h('p', {}, `A retry ${retryEffect(r)}, which fails the same way unless the change or its pipeline was fixed meanwhile.`),
      h('div', {class: 'actions'}, yes, no));
    dialog.showModal();
    no.focus(); // the safe choice is the default one
  }

  // A failed request can also be withdrawn for its requester (closed for good; they can apply
  // again), after the operator confirmed.
  function withdrawButton(r) {
    const b = h('button', {type: 'button', class: 'danger', 'data-focus': `withdraw-${r.operationId}`, 'data-withdraw': r.operationId},
      'Withdraw…', h('span', {class: 'sr-only'}, ` ${r.targetKey} for ${r.subject}`));
    const go = () => act(b, 'Withdrawing…', () => post(`/api/requests/${encodeURIComponent(r.operationId)}/withdraw`, {operationId: newOperationId()}), () => {
      tell('ok', 'Withdrawn for its requester: ', h('a', {href: `/requests/${encodeURIComponent(r.operationId)}`}, `${r.targetKey} (${r.subject})`), '. They can apply again.');
      stuckPoll.now();
    });
    b.addEventListener('click', () => confirmWithdraw(r, go));
    return b;
  }

  function confirmWithdraw(r, go) {
    const yes = h('button', {type: 'button', class: 'primary', id: 'withdraw-confirm-yes'}, 'Withdraw it');
    const no = h('button', {type: 'button', id: 'withdraw-confirm-no'}, 'Cancel');
    yes.addEventListener('click', () => { dialog.close(); go(); });
    no.addEventListener('click', () => dialog.close());
    swap(dialog,
      h('h2', {id: 'retry-confirm-title'}, `Withdraw ${r.targetKey} for ${r.subject}?`),
      h('p', {}, `It stopped at “${stepName(r.step)}”. Withdrawing closes the request for good${r.flow === 'legacy' ? ' and its merge request' : ''}; nothing of it is in effect, and ${r.subject} can apply again.`),
      h('div', {class: 'actions'}, yes, no));
    dialog.showModal();
    no.focus();
  }

  // ---- batches ----
  const batches = section(root, 'batches', 'Batches', true);
  // A status filter: a BLOCKED batch is the one to look at, and it must not drop off the page.
  let batchStatus = '';
  const statusSelect = h('select', {id: 'batch-status'},
    [['', 'All'], ['BLOCKED', 'Blocked'], ['RUNNING', 'Running'], ['FAILED', 'Failed'], ['SUCCEEDED', 'Succeeded']].map(([v, label]) => h('option', {value: v}, label)));
  statusSelect.addEventListener('change', () => { batchStatus = statusSelect.value; batchesPoll.now(); });
  batches.body.before(h('p', {class: 'small'}, h('label', {for: 'batch-status'}, 'Show '), statusSelect));
  let recentMembers = [];
  let batchesRead = false; // the recent batches were read once: their members are the sample of "Time per stage"
  // Unfiltered, the list reads the BLOCKED and the RUNNING batches on their own, so neither drops
  // off the page behind newer history, and shows them first: BLOCKED, then active, then history.
  const loadBatches = async () => {
    if (batchStatus) return {groups: [['', (await get(`/api/ops/batches?status=${batchStatus}`)).items || []]]};
    const [blocked, running, recent] = await Promise.all(['?status=BLOCKED', '?status=RUNNING', ''].map((q) => get(`/api/ops/batches${q}`)));
    const active = [...(blocked.items || []), ...(running.items || [])];
    const shown = new Set(active.map((b) => b.id));
    const history = (recent.items || []).filter((b) => !shown.has(b.id));
    return {recent: recent.items || [], groups: [['Blocked', blocked.items || []], ['Active', running.items || []], ['History', history]]};
  };
  const batchesPoll = poll(loadBatches, (page) => {
    batches.live.ok();
    const groups = page.groups.filter(([, items]) => items.length);
    if (!batchStatus) {
      recentMembers = page.recent.flatMap((b) => (b.members || []).map((m) => m.operationId));
      if (!batchesRead) {
        batchesRead = true;
        latencyPoll.now(); // measure at once, rather than at the next look
      }
    }
    if (busyReading(batches.body)) return;
    const none = batchStatus ? `No ${batchStatus.toLowerCase()} batches.` : 'No batches yet. Approved requests are batched by the next round.';
    swap(batches.body, groups.length ? groups.map(([title, items]) => [
      title ? h('h3', {class: 'batch-group', 'data-batch-group': title.toLowerCase()}, title) : null,
      h('ul', {class: 'batches'}, items.map(batchItem))]) : empty(h('p', {}, none)));
  }, (err) => {
    batches.live.failed();
    swap(batches.body, errorBox(err, () => batchesPoll.now()));
  }, 3000);
  stops.push(batchesPoll.stop);

  // settleButton settles batch id; fromStuck: the stuck list's, beside the batch list's own.
  function settleButton(id, fromStuck = false) {
    const attrs = fromStuck ? {'data-focus': `stuck-settle-${id}`, 'data-stuck-settle': id} : {'data-focus': `settle-${id}`, 'data-settle': id};
    const settle = h('button', {type: 'button', ...attrs}, `Settle batch #${id}`);
    settle.addEventListener('click', () => {
      if (!confirm(`Settle batch #${id}? An open MR is closed (if it merged meanwhile, the batch succeeds); otherwise the batch fails and its members can be retried.`)) return;
      act(settle, 'Settling…', () => post(`/api/ops/batches/${id}/settle`, {operationId: newOperationId()}), () => {
        tell('ok', `Batch #${id} settled.`);
        batchesPoll.now();
        stuckPoll.now();
      });
    });
    return settle;
  }

  function batchItem(b) {
    const settle = b.status === 'RUNNING' || b.status === 'BLOCKED' ? settleButton(b.id) : null;
    const members = b.members || [];
    const moved = new Map((b.moved || []).map((m) => [m.operationId, m.batchId || 0]));
    // Operation ids in bindery's notes ("isolated the culprit <id>") read as the request they are.
    const named = new Map(members.map((m) => [m.operationId, `${m.targetKey} (${m.subject})`]));
    return h('li', {class: 'card batch', id: `batch-${b.id}`, 'data-batch-id': b.id},
      h('div', {class: 'batch-head'},
        h('h3', {}, `Batch #${b.id}`), batchBadge(b.status), h('span', {class: 'muted'}, b.partition),
        b.mr ? externalLink(b.mr.url, `MR !${b.mr.id}`) : null,
        b.pipeline ? externalLink(b.pipeline.url, `Pipeline #${b.pipeline.id}`) : null,
        h('span', {class: 'muted small'}, 'started ', time(b.createdAt), `, ${b.status === 'RUNNING' || b.status === 'BLOCKED' ? 'running for ' + since(b.createdAt) : 'last change ' + since(b.updatedAt) + ' ago'}`),
        settle),
      b.blocker ? h('p', {class: 'small', 'data-batch-blocker': b.id}, b.blocker.text) : b.note ? h('p', {class: 'small', 'data-note': b.id}, linked(b.note, named)) : null,
      // Its part in isolating a failing change: the culprit it failed alone, or the round it ran.
      b.bisection ? h('p', {class: 'small', 'data-bisection': b.id}, b.bisection.culprit
        ? ['Isolated the culprit ', requestLink(b.bisection.culprit, named), ` after ${b.bisection.rounds} bisection${b.bisection.rounds === 1 ? '' : 's'}`,
          b.bisection.of === b.id ? '' : [' (bisection of ', batchLink(b.bisection.of), ')'], '.']
        : ['Bisection of ', batchLink(b.bisection.of), `, round ${b.bisection.rounds}.`]) : null,
      // A decided failure: being settled, or its settlement did not go through (bindery tries again).
      b.failing ? h('div', {class: `notice ${b.lastError ? 'tone-bad' : 'tone-warn'} small`, role: 'status', 'data-failing': b.id},
        b.lastError
          ? [`Settling as failed (${b.failing}) did not go through: ${b.lastError}`, '. bindery tries again; you can also settle or retry the batch.']
          : `Failed (${b.failing}); being settled: its merge request is being closed.`) : null,
      remembered(`batch-${b.id}`, members.length <= 5,
        h('summary', {}, `${members.length} member${members.length === 1 ? '' : 's'}`),
        h('ul', {class: 'members'}, members.map((m) => h('li', {'data-member': m.operationId},
          h('a', {href: `/requests/${encodeURIComponent(m.operationId)}`}, m.targetKey), ' ', h('span', {class: 'muted'}, m.subject), ' ',
          // A member that left with its change is not this batch's outcome: say where it went.
          moved.has(m.operationId)
            ? h('span', {class: 'badge tone-off', 'data-moved': moved.get(m.operationId)}, moved.get(m.operationId)
              ? h('span', {}, 'moved to ', h('a', {href: `#batch-${moved.get(m.operationId)}`}, `batch #${moved.get(m.operationId)}`))
              : 'moved back to the queue')
            : statusBadge(m.status))))));
  }

  // ---- per-stage latency ----
  const latency = section(root, 'latency', 'Time per stage (recent requests)', true);
  const latencyPoll = poll(async () => {
    // Until the batches were read there is nothing to sample yet: the section stays "loading",
    // not "no recent request".
    if (!batchesRead) return null;
    // The request views carry per-stage durations; sample the members of the newest batches.
    const ids = [...new Set(recentMembers)].slice(0, 20);
    const views = await Promise.all(ids.map((id) => get(`/api/requests/${encodeURIComponent(id)}`).catch(() => null)));
    return views.filter(Boolean);
  }, (views) => {
    if (views === null) return;
    latency.live.ok();
    swap(latency.body, stageTable(views));
  }, (err) => {
    latency.live.failed();
    swap(latency.body, errorBox(err, () => latencyPoll.now()));
  }, () => (recentMembers.length ? 30000 : 3000));
  stops.push(latencyPoll.stop);

  // ---- notifications ----
  const notify = section(root, 'notify', 'Notifications: receivers and deliveries', true);
  const notifyPoll = poll(() => get('/api/ops/notify'), (eps) => {
    notify.live.ok();
    if (!busyReading(notify.body)) swap(notify.body, receivers(eps || []));
  }, (err) => {
    notify.live.failed();
    swap(notify.body, errorBox(err, () => notifyPoll.now()));
  }, 5000);
  stops.push(notifyPoll.stop);

  function receivers(eps) {
    if (!eps.length) return empty(h('p', {}, 'No receiver is configured (notify.webhooks, notify.email, notify.chat) and nothing was sent yet.'));
    return h('ul', {class: 'receivers'}, eps.map((e) => h('li', {class: 'card receiver', 'data-endpoint': e.name},
      h('div', {class: 'title-row'}, h('strong', {}, e.name), ' ', health(e), e.disabledAt ? enableButton(e) : null),
      h('p', {class: 'muted small'}, e.url || e.channel, e.configured ? '' : ' · no longer configured',
        e.lastSuccess ? [' · last success ', time(e.lastSuccess)] : null, e.failingSince ? [' · failing since ', time(e.failingSince)] : null),
      e.disabledReason ? h('p', {class: 'small'}, 'Disabled: ', e.disabledReason) : null,
      e.deliveries.length ? remembered(`notify-${e.name}`, !!(e.failingSince || e.disabledAt), h('summary', {}, `Last ${plural(e.deliveries.length, 'delivery')}`),
        h('div', {class: 'table-scroll'}, h('table', {class: 'list'},
          h('thead', {}, h('tr', {}, ['Event', 'Request', 'Status', 'Attempts', 'Next try', ''].map((c) => h('th', {scope: 'col'}, c)))),
          h('tbody', {}, e.deliveries.map((d) => h('tr', {'data-delivery': d.id},
            h('td', {'data-label': 'Event'}, h('code', {}, d.event || '—'), d.to ? h('div', {class: 'muted small'}, d.to) : null),
            h('td', {'data-label': 'Request'}, d.operationId ? h('a', {href: `/requests/${encodeURIComponent(d.operationId)}`}, d.operationId.slice(0, 8)) : '—'),
            h('td', {'data-label': 'Status'}, h('span', {class: `badge tone-${deliveryTone(d.status)}`}, d.status), d.lastError ? h('div', {class: 'small'}, d.lastError) : null),
            h('td', {'data-label': 'Attempts'}, attempts(d)),
            h('td', {'data-label': 'Next try'}, d.nextAt ? time(d.nextAt) : '—'),
            h('td', {}, d.status === 'failed' || d.status === 'skipped' ? resendButton(e, d) : null))))))) : h('p', {class: 'muted small'}, 'Nothing sent yet.'))));
  }

  function health(e) {
    if (e.disabledAt) return h('span', {class: 'badge tone-bad'}, 'disabled');
    if (e.failingSince) return h('span', {class: 'badge tone-warn'}, 'failing');
    return h('span', {class: 'badge tone-ok'}, 'healthy');
  }

  // attempts says how often a delivery was tried and what the latest tries met, in words:
  // "2 attempts: answered 410 (gone), then answered 200".
  function attempts(d) {
    const tries = d.tries || [];
    if (!tries.length) return plural(d.attempts || 0, 'attempt');
    const said = (a) => (a.code ? `answered ${a.code}${a.class === 'ok' || a.class === 'status' ? '' : ` (${a.class})`}` : ({timeout: 'no answer in time', connect: 'could not connect', dropped: 'the connection dropped'}[a.class] || a.class));
    return h('span', {title: tries.map((a) => `${said(a)} in ${a.latencyMs} ms${a.error ? `: ${a.error}` : ''}`).join('\n')},
      `${plural(d.attempts, 'attempt')}: `, tries.slice(-3).map(said).join(', then '));
  }

  // resendButton sends a failed delivery again, where that can work: a disabled receiver gets
  // nothing until it is enabled, so its rows say that instead of offering a button that would
  // send nothing.
  function resendButton(e, d) {
    if (e.disabledAt) return h('span', {class: 'small muted', 'data-resend-after-enable': d.id}, 'Enable the receiver first to send it again');
    const b = h('button', {type: 'button', 'data-focus': `resend-${d.id}`, 'data-resend': d.id}, 'Send again');
    b.addEventListener('click', () => act(b, 'Sending…', () => post(`/api/ops/notify/deliveries/${d.id}/resend`, {operationId: newOperationId()}), () => {
      tell('ok', `Delivery ${d.id} (${d.event}) is queued to be sent again now; its row shows how it goes.`);
      notifyPoll.now();
    }));
    return b;
  }

  function enableButton(e) {
    const b = h('button', {type: 'button', 'data-focus': `enable-${e.name}`, 'data-enable': e.name}, 'Enable again');
    b.addEventListener('click', () => act(b, 'Enabling…', () => post(`/api/ops/notify/endpoints/${encodeURIComponent(e.name)}/enable`, {operationId: newOperationId()}), () => {
      tell('ok', `${e.name} is enabled again: new events are delivered to it; send failed ones again below.`);
      notifyPoll.now();
    }));
    return b;
  }

  // ---- configuration ----
  const config = section(root, 'config', 'Effective configuration', true);
  const configPoll = poll(() => get('/api/ops/config'), (c) => {
    config.live.ok();
    swap(configBanner, c && c.lastError ? h('div', {class: 'notice tone-bad', role: 'alert', 'data-config-error': ''},
      h('p', {}, h('strong', {}, 'The configuration reload was refused'), ' (', time(c.lastError.at), '): the previous configuration stays in force. ',
        h('a', {href: '#config-error'}, 'See the error'), '.'),
      h('p', {class: 'small'}, h('code', {}, c.lastError.message.split('\n')[0]))) : null,
    c && c.removedTargets && c.removedTargets.length ? removedTargetsNotice(c.removedTargets, 'data-targets-removed') : null);
    if (!busyReading(config.body)) swap(config.body, configView(c, remembered));
  }, (err) => {
    config.live.failed();
    swap(config.body, errorBox(err, () => configPoll.now()));
  }, 10000);
  stops.push(configPoll.stop);

  // ---- audit ----
  const audit = section(root, 'audit', 'Audit log', true);
  const auditPoll = poll(() => get('/api/ops/audit'), (page) => {
    audit.live.ok();
    const items = ((page && page.items) || []).slice(0, 25);
    if (busyReading(audit.body)) return;
    swap(audit.body, items.length ? h('div', {class: 'table-scroll'}, h('table', {class: 'list'},
      h('thead', {}, h('tr', {}, ['When', 'Who', 'Action', 'Parameters'].map((c) => h('th', {scope: 'col'}, c)))),
      h('tbody', {}, items.map((a) => h('tr', {},
        h('td', {'data-label': 'When'}, time(a.at)),
        h('td', {'data-label': 'Who'}, a.actor),
        h('td', {'data-label': 'Action'}, auditAction(a.action)),
        h('td', {'data-label': 'Parameters', class: 'params'}, paramList(a.params))))))) : empty(h('p', {}, 'No operator actions recorded yet.')));
  }, (err) => {
    audit.live.failed();
    swap(audit.body, errorBox(err, () => auditPoll.now()));
  }, 10000);
  stops.push(auditPoll.stop);

  return () => stops.forEach((s) => s());
}

/** glanceRank orders the projects at a glance: blocked, a failed pipeline, paused, busy, idle. */
function glanceRank(t) {
  const cars = t.cars || [];
  if (t.blocked) return 0;
  if (t.failed || cars.some((c) => c.pipelineState === 'failed')) return 1;
  if (t.paused) return 2;
  if (cars.length || t.waiting) return 3;
  return 4;
}

const operationIdPattern = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/gi;

/** linked is a note of bindery with each operation id a link to its request and "batch N" a link
 * to that batch in the list. */
function linked(text, named) {
  const parts = [];
  let at = 0;
  for (const m of text.matchAll(new RegExp(`${operationIdPattern.source}|\\bbatch (\\d+)\\b`, 'gi'))) {
    parts.push(text.slice(at, m.index));
    parts.push(m[1] ? ['batch ', batchLink(Number(m[1]), '')] : requestLink(m[0], named));
    at = m.index + m[0].length;
  }
  parts.push(text.slice(at));
  return parts;
}

function requestLink(operationId, named) {
  return h('a', {href: `/requests/${encodeURIComponent(operationId)}`, 'data-request-link': operationId, title: operationId},
    named.get(operationId) || `request ${operationId.slice(0, 8)}`);
}

function batchLink(id, prefix = 'batch ') {
  return h('a', {href: `#batch-${id}`}, `${prefix}#${id}`);
}

/** deliveryTone is a delivery status's colour. */
function deliveryTone(status) {
  return {delivered: 'ok', pending: 'busy', failed: 'bad', skipped: 'off'}[status] || 'off';
}

/** retryEffect is what an operator's retry of a failure does, by the request's flow. */
function retryEffect(r) {
  if (r.flow === 'legacy') return `runs ${r.mr ? `merge request !${r.mr.id}` : 'its merge request'} again`;
  return 'puts it back in line: the next batch round opens a new merge request for it';
}

function section(root, id, title, isLive) {
  const live = isLive ? liveIndicator() : null;
  const body = h('div', {}, isLive ? loading(title.toLowerCase()) : null);
  root.append(h('section', {class: 'ops-section', id, 'aria-labelledby': `${id}-title`},
    h('div', {class: 'title-row'}, h('h2', {id: `${id}-title`}, title), live ? live.el : null), body));
  return {body, live};
}

/** stageTable aggregates the stages of request views: median and slowest per stage. */
function stageTable(views) {
  const byStage = new Map();
  for (const v of views) {
    for (const s of v.stages || []) {
      if (!byStage.has(s.stage)) byStage.set(s.stage, []);
      byStage.get(s.stage).push(s.durationNs || 0);
    }
  }
  if (!byStage.size) return empty(h('p', {}, 'No recent request to measure yet. Durations appear once requests have been batched.'));
  const rows = [...byStage].map(([stage, ds]) => {
    ds.sort((a, b) => a - b);
    return {stage, median: ds[Math.floor((ds.length - 1) / 2)], max: ds[ds.length - 1], n: ds.length};
  });
  const top = Math.max(1, ...rows.map((r) => r.max));
  return h('div', {},
    h('p', {class: 'muted small'}, `From the ${views.length} most recent batched request${views.length === 1 ? '' : 's'}. Bars: median; the thin mark is the slowest.`),
    h('ul', {class: 'bars', id: 'stage-latency'}, rows.map((r) => h('li', {},
      h('span', {class: 'bar-label'}, stageName(r.stage)),
      h('span', {class: 'bar-track', 'aria-hidden': 'true'},
        h('span', {class: 'bar', style: {width: `${Math.max(2, (100 * r.median) / top)}%`}}),
        h('span', {class: 'bar-max', style: {left: `${Math.min(99, (100 * r.max) / top)}%`}})),
      h('span', {class: 'bar-value'}, `${duration(r.median)} median · ${duration(r.max)} slowest · ${r.n}`)))));
}

// removedTargetsNotice tells that targets left the catalog while bindings use them: what becomes
// of those bindings, and what to do when the file was cut short (attr, value: how to find it).
function removedTargetsNotice(ts, attr, value = '') {
  const one = ts.length === 1;
  return h('div', {class: 'notice tone-warn', role: 'status', [attr]: value},
    h('p', {}, h('strong', {}, one ? 'A target left the catalog while bindings use it' : 'Targets left the catalog while bindings use them'), ': ',
      ts.map((t, i) => [i ? ', ' : '', h('code', {}, t.key), ` (${t.inFlight} in flight, ${t.inEffect} in effect)`]), '.'),
    h('p', {class: 'small'}, `They finish, and stay until revoked or expired, with the target as it was when they were accepted; new applications for ${one ? 'it' : 'them'} are refused. If the configuration file was cut short, restore it (replace the file in one rename).`));
}

function configView(c, remembered) {
  const keys = c.keys || [];
  const fellBack = keys.filter((k) => k.status === 'fallback');
  const problems = [];
  if (c.lastError) {
    problems.push(h('div', {class: 'notice tone-bad', role: 'alert', id: 'config-error'},
      h('p', {}, h('strong', {}, 'The last edit of the configuration failed to load'), ' (', time(c.lastError.at), '). The previous configuration stays in force.'),
      h('pre', {class: 'file'}, c.lastError.message)));
  }
  if (c.removedTargets && c.removedTargets.length) {
    problems.push(removedTargetsNotice(c.removedTargets, 'id', 'targets-removed'));
  }
  if (fellBack.length) {
    problems.push(h('div', {class: 'notice tone-warn'}, h('p', {}, `${fellBack.length} key${fellBack.length === 1 ? '' : 's'} had an invalid value and fell back to the default: `,
      fellBack.map((k, i) => [i ? ', ' : '', h('code', {}, k.key)]), '.')));
  }
  if (c.unknown && c.unknown.length) {
    problems.push(h('div', {class: 'notice tone-warn'}, h('p', {}, 'Unknown keys (typos?) are ignored: ', c.unknown.map((k, i) => [i ? ', ' : '', h('code', {}, k)]), '.')));
  }
  if (c.pendingRestart && c.pendingRestart.length) {
    problems.push(h('div', {class: 'notice tone-warn'}, h('p', {}, 'Changed static keys take effect after a restart: ', c.pendingRestart.map((k, i) => [i ? ', ' : '', h('code', {}, k)]), '.')));
  }
  const addr = keys.find((k) => k.key === 'server.addr');
  return h('div', {},
    h('p', {class: 'muted'}, `Generation ${c.generation}, loaded `, time(c.loadedAt), '. Secrets are redacted.'),
    addr ? h('p', {id: 'config-listen'}, 'Listening on ', h('code', {}, addr.effective), addr.note ? ` (${addr.note})` : '', '.') : null,
    problems.length ? problems : h('p', {class: 'notice tone-ok'}, 'The configuration loaded cleanly: no errors, no fallbacks, no unknown keys.'),
    remembered('config-keys', false,
      h('summary', {}, `All ${keys.length} keys`),
      h('div', {class: 'table-scroll'}, h('table', {class: 'list config'},
        h('thead', {}, h('tr', {}, ['Key', 'Effective value', 'Source', ''].map((t) => h('th', {scope: 'col'}, t)))),
        h('tbody', {}, keys.map((k) => h('tr', {class: k.status === 'fallback' ? 'row-warn' : null},
          h('td', {'data-label': 'Key'}, h('code', {}, k.key)),
          h('td', {'data-label': 'Value'}, h('code', {}, k.effective)),
          h('td', {'data-label': 'Source', 'data-source': k.status}, keySource(k.status), k.note ? h('span', {class: 'muted small block'}, k.note) : null),
          h('td', {'data-label': ''}, k.static ? h('span', {class: 'badge tone-off'}, 'static') : null))))))));
}
