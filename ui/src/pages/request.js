// Request detail: where one request is, why it waits, what happened when, and what to do next
// (docs/workflow.md, 'What the requester is told'). Refreshed live until it settles, then slowly
// (an operator may retry it).
import {h, swap, loading, errorBox, externalLink, describeError, busyReading, announce} from '../dom.js';
import {get, post, newOperationId} from '../api.js';
import {poll, liveIndicator} from '../poll.js';
import {statusBadge, stateBadge, stepName, stageName, linkify, duration, since, time, ordinal, pipelineBadge} from '../format.js';

export function mount(root, ctx) {
  const id = ctx.params[0];
  ctx.title('Request');
  const live = liveIndicator();
  const region = h('div', {});
  // The confirmation is a modal dialog of the page, outside the region the live refresh
  // redraws, so a refresh never takes it away mid-decision.
  const dialog = h('dialog', {id: 'action-confirm', 'aria-labelledby': 'action-confirm-title'});
  root.append(h('p', {class: 'crumbs'}, h('a', {href: '/requests'}, '← My requests')), region, dialog);
  // An operator reads the status and step codes beside the words (they search logs for them); a
  // requester reads one label per state (the view's), the same in the badge, the current step and
  // the list of requests.
  const codes = !!(ctx.me && ctx.me.ops);
  let view = null;
  let notice = null; // outcome of a revoke or a withdrawal, shown above the status until the request moves
  // A revoke's outcome is told where its button was, at the foot of the page where the reader
  // is, not above the status out of sight.
  let noticeNearRevoke = false;

  function render() {
    draw();
    if (keepNotice) showNotice();
  }

  function draw() {
    const v = view;
    ctx.title(v.targetTitle || v.targetKey);
    swap(region,
      h('div', {class: 'title-row'}, h('h1', {tabindex: '-1', 'data-focus': 'request-title'}, v.targetTitle || v.targetKey), live.el),
      h('p', {class: 'muted'}, h('code', {}, v.targetKey), ' · ', v.project, ' · requested by ', v.subject),
      noticeNearRevoke ? null : notice,
      statusCard(v, codes),
      v.drift ? driftCard(v.drift) : null,
      renewCard(v),
      stageTrack(v),
      failed(v) ? failureCard(v, waysOut(v)) : v.waiting ? waitingCard(v, mergeNext(v), codes) : null,
      v.status === 'REJECTED' ? decisionCard(v) : null,
      h('div', {class: 'columns'},
        h('section', {'aria-labelledby': 'timeline-title'}, h('h2', {id: 'timeline-title'}, 'Timeline'), timeline(v.timeline || [], !moving(v), codes)),
        h('section', {'aria-labelledby': 'stages-title'}, h('h2', {id: 'stages-title'}, 'Time per stage'), stages(v.stages || [], moving(v)), details(v),
          messages(sent, v.subject === ctx.me.identity))),
      noticeNearRevoke ? notice : null,
      revokeSection(v));
  }

  // sent: what bindery sent about the request (its emails; an operator sees every delivery),
  // read beside the view and less often; null until the first read, or when it cannot be read.
  let sent = null;
  const sp = poll(() => get(`/api/requests/${encodeURIComponent(id)}/sent`), (data) => {
    sent = Array.isArray(data) ? data : [];
    if (view && !busyReading(region)) render();
  }, () => {}, 5000);

  // mergeNext is an operator's button that sends the request, waiting in its project's waiting
  // set, into the next car ahead of the others (null: not an operator, or nothing to send).
  function mergeNext(v) {
    const w = v.waiting;
    if (!ctx.me.ops || !w || !w.position || w.car || w.nextBy) return null;
    const button = h('button', {type: 'button', 'data-focus': 'merge-next', id: 'merge-next'}, 'Merge next');
    button.addEventListener('click', async () => {
      button.disabled = true;
      try {
        await post(`/api/ops/requests/${encodeURIComponent(id)}/next`, {operationId: newOperationId()});
        notice = h('div', {class: 'notice tone-ok', role: 'status'}, `Sent into the next car of ${v.project}, ahead of the queue.`);
      } catch (err) {
        notice = h('div', {class: 'notice tone-bad', role: 'alert'}, describeError(err));
      }
      p.now();
    });
    return h('p', {class: 'actions'}, button, h('span', {class: 'muted small'}, 'Operators: send it into the next car of its project, ahead of the requests admitted before it (a hotfix).'));
  }

  // renewCard says how long a binding in effect has left — "expires in 6 days — Renew" — with
  // the Renew button for its holder or an operator (docs/workflow.md, 'Expiry, reminders and
  // renewal'): the binding stays in effect throughout; a renewal waiting for the approvers says
  // so instead of the button.
  function renewCard(v) {
    if (!v.expiresIn) return null;
    const mine = v.subject === ctx.me.identity;
    const parts = [h('strong', {id: 'expires-in'}, v.expiresIn)];
    if (v.renewable && (mine || ctx.me.ops)) {
      const button = h('button', {type: 'button', class: 'primary', id: 'renew-request', 'data-focus': 'renew'}, 'Renew');
      button.addEventListener('click', () => confirmThen(button, `Renew ${v.targetKey}${mine ? '' : ` for ${v.subject}`}?`,
        'The binding stays in effect throughout; its new expiry is counted from now.', 'Renew',
        () => post(`/api/requests/${encodeURIComponent(id)}/renew`, {operationId: newOperationId()}),
        'Renewal asked. The expiry above follows it.'));
      parts.push(' — ', button);
    }
    const r = v.renewal;
    return h('section', {class: 'card renew', id: 'renew', 'aria-label': 'Expiry'},
      h('p', {}, ...parts),
      r && r.words ? h('p', {class: 'muted small', id: 'renewal-words'}, r.words) : null,
      r && r.status === 'RENEWED' && r.decidedAt ? h('p', {class: 'muted small'}, `Last renewed ${time(r.decidedAt)}${r.decidedBy ? ` by ${r.decidedBy}` : ''}.`) : null,
      r && r.file ? h('p', {class: 'muted small', id: 'renewal-file', 'data-state': r.file.state}, r.file.text) : null);
  }

  function revokeSection(v) {
    if (v.status !== 'VALIDATED' || v.nextAction !== 'NONE') return null;
    const button = h('button', {type: 'button', class: 'danger', id: 'revoke-request', 'data-focus': 'revoke'}, 'Revoke this binding');
    button.addEventListener('click', () => confirmThen(button, `Revoke ${v.targetKey} for ${v.subject}?`,
      'The binding is removed through a merge request; it stays in effect until the deploy that includes the removal.', 'Revoke',
      () => post(`/api/requests/${encodeURIComponent(id)}/revoke`, {operationId: newOperationId()}),
      'Revocation started. This page follows it.', true));
    return h('section', {'aria-labelledby': 'revoke-title', class: 'revoke'},
      h('h2', {id: 'revoke-title'}, 'No longer needed?'), h('p', {class: 'muted'}, 'Revoking removes the file again through the same review path.'), button);
  }

  // waysOut are the actions a failed request offers the reader: its owner withdraws it (and
  // applies again); an operator retries or withdraws it — never "contact support".
  function waysOut(v) {
    const mine = v.subject === ctx.me.identity;
    if (!v.withdrawable || (!mine && !ctx.me.ops)) return null;
    const buttons = [];
    if (ctx.me.ops) {
      const retry = h('button', {type: 'button', id: 'retry-request', 'data-focus': 'retry-request'}, 'Retry');
      retry.addEventListener('click', () => confirmThen(retry, `Retry ${v.targetKey} for ${v.subject}?`,
        v.nextAction === 'CONTACT_SUPPORT'
          ? 'It stopped at a failure of the change itself: a retry fails the same way unless the change or its pipeline was fixed meanwhile.'
          : 'The step that stopped runs again.',
        'Retry', () => post(`/api/ops/requests/${encodeURIComponent(id)}/retry`, {operationId: newOperationId()}),
        'Retry started. This page follows it.'));
      buttons.push(retry);
    }
    const withdraw = h('button', {type: 'button', class: 'danger', id: 'withdraw-request', 'data-focus': 'withdraw-request'},
      mine ? 'Withdraw this request' : 'Withdraw it');
    withdraw.addEventListener('click', () => confirmThen(withdraw, `Withdraw ${v.targetKey}${mine ? '' : ` for ${v.subject}`}?`,
      `The request is closed for good${v.flow === 'legacy' ? ' and its merge request is closed' : ''}; nothing of it is in effect. ` +
        `${mine ? 'You' : 'Its requester'} can then apply again.`,
      'Withdraw', () => post(`/api/requests/${encodeURIComponent(id)}/withdraw`, {operationId: newOperationId()}),
      mine ? 'Withdrawn. You can apply again.' : 'Withdrawn. Its requester can apply again.'));
    buttons.push(withdraw);
    return h('div', {class: 'ways-out', id: 'ways-out'},
      h('h3', {}, mine && !ctx.me.ops ? 'Your ways out' : 'What you can do'),
      h('div', {class: 'actions'}, ...buttons));
  }

  // confirmThen asks in the page's dialog, the safe choice focused; yes runs call and tells the
  // outcome in the notice (nearRevoke: at the revoke button's place), scrolled into view.
  function confirmThen(button, title, body, yesWords, call, done, nearRevoke = false) {
    const yes = h('button', {type: 'button', class: 'primary', id: 'action-confirm-yes'}, yesWords);
    const no = h('button', {type: 'button', id: 'action-confirm-no'}, 'Cancel');
    no.addEventListener('click', () => dialog.close());
    yes.addEventListener('click', async () => {
      dialog.close();
      button.disabled = true;
      try {
        await call();
        notice = h('div', {class: 'notice tone-ok', role: 'status', id: 'action-notice', tabindex: '-1'}, done);
        noticeAt = null;
      } catch (err) {
        notice = h('div', {class: 'notice tone-bad', role: 'alert', id: 'action-notice', tabindex: '-1'}, describeError(err));
        button.disabled = false;
      }
      noticeNearRevoke = nearRevoke;
      keepNotice = true;
      if (view) draw();
      showNotice();
      p.now();
    });
    swap(dialog, h('h2', {id: 'action-confirm-title'}, title), h('p', {}, body), h('div', {class: 'actions'}, yes, no));
    dialog.showModal();
    no.focus();
  }

  // showNotice brings an action's outcome into view and focus: the reader (and a screen reader)
  // is where the action was, and the page's redraw must not leave the outcome out of sight.
  // The outcome of an action stays in view and focus through the redraws of the live refresh
  // (the page above it changes) until the reader moves on: scrolls, touches or types.
  let keepNotice = false;
  const moveOn = () => { keepNotice = false; };
  for (const e of ['wheel', 'touchstart', 'keydown']) addEventListener(e, moveOn, {passive: true});
  function showNotice() {
    if (!notice || !notice.isConnected) return;
    notice.scrollIntoView({block: 'center'});
    notice.focus({preventScroll: true});
  }

  let noticeAt = null; // the state the notice was told at: it goes once the request moves on
  swap(region, loading('the request'));
  const p = poll(() => get(`/api/requests/${encodeURIComponent(id)}`), (data) => {
    const moved = view && (view.status !== data.status || (view.step && view.step.code) !== (data.step && data.step.code));
    const at = `${data.status} ${data.step && data.step.code}`;
    if (notice && noticeAt === null) noticeAt = at;
    else if (notice && noticeAt !== at) notice = null;
    view = data;
    live.ok();
    if (moved) announce(`${data.label || stepName(data.step)}. ${data.nextActionText || ''}`);
    if (!busyReading(region)) render();
  }, (err) => {
    live.failed();
    if (err.code === 'NOT_FOUND' || err.code === 'ACCESS_DENIED') {
      p.stop();
      sp.stop(); // nothing was sent about a request that is not there (or not the reader's)
      swap(region, h('h1', {tabindex: '-1', 'data-focus': 'request-title'}, 'Request not found'), h('p', {}, 'There is no request ', h('code', {}, id), ' that you may see.'), h('p', {}, h('a', {href: '/requests'}, 'Back to my requests')));
      return;
    }
    if (!view) swap(region, h('h1', {}, 'Request'), errorBox(err, () => p.now()));
  }, () => (!view || view.nextAction === 'WAIT' || view.nextAction === 'WAIT_MANUAL' ? 2000 : 10000));
  return () => {
    p.stop();
    sp.stop();
    for (const e of ['wheel', 'touchstart', 'keydown']) removeEventListener(e, moveOn);
  };
}

// messages says what bindery told about the request: "emailed you at 10:42: in effect".
function messages(sent, mine) {
  if (!sent) return null;
  const items = sent.map((m) => {
    const who = m.channel === 'email' ? (mine ? 'you' : m.to) : m.to;
    const verb = {email: 'emailed', webhook: 'sent to', chat: 'posted to', mrnote: 'noted on'}[m.channel] || 'sent to';
    const state = m.status === 'delivered' ? null
      : h('span', {class: `badge tone-${m.status === 'pending' ? 'busy' : m.status === 'failed' ? 'bad' : 'off'}`}, m.status);
    return h('li', {'data-sent': m.event, 'data-channel': m.channel},
      m.status === 'delivered' ? [verb, ' ', who, ' at ', time(m.at), ': ', h('strong', {}, m.label)]
        : [h('strong', {}, m.label), ` (${m.channel} to ${who}) `, state],
      m.note && m.status !== 'delivered' ? h('p', {class: 'small muted'}, m.note) : null);
  });
  return h('section', {'aria-labelledby': 'sent-title', id: 'sent'},
    h('h2', {id: 'sent-title'}, 'What bindery told'),
    items.length ? h('ul', {class: 'sent'}, items)
      : h('p', {class: 'muted small'}, 'Nothing sent about this request yet. ', h('a', {href: '/settings'}, 'Choose what you are emailed about')));
}

// daysLeft is how long until an expiry, in days as the catalog counts them: "(in 30 days)".
function daysLeft(iso) {
  const left = Math.ceil((Date.parse(iso) - Date.now()) / 86400000);
  if (Number.isNaN(left)) return '';
  return left > 1 ? `(in ${left} days)` : left === 1 ? '(within a day)' : '(due now)';
}

// moving: bindery itself is taking the request further (nothing stopped, nothing finished).
function moving(v) {
  return v.nextAction === 'WAIT';
}

// failed: the request stopped at a failure (CREATE_FAILED, HANDLE_FAILED) or one that waiting
// will not fix; it is shown as finished there, not as waiting.
function failed(v) {
  return v.nextAction === 'CONTACT_SUPPORT' || v.status === 'CREATE_FAILED' || v.status === 'HANDLE_FAILED';
}

// withdrawn: a failed request its owner or an operator withdrew (CLOSED, never in effect).
function withdrawn(v) {
  return v.status === 'CLOSED' && v.step && v.step.code === 10205;
}

// The stage view's way, in order: the approval-first flow batches after the approval; the legacy
// flow opens its own MR (CI) before it. A removal continues after "In effect".
function stagesOfFlow(v) {
  const way = v.flow === 'legacy' ? ['ci', 'approval', 'merge', 'deploy', 'effect'] : ['approval', 'batch', 'ci', 'merge', 'deploy', 'effect'];
  if (v.stage === 'close' || v.stage === 'revoked' || (v.stages || []).some((s) => s.stage === 'close')) way.push('close', 'revoked');
  return way;
}

// stageBadge names the request's state: the view's label (one per state, from the server's
// sentence table), toned by where it is; the stage track beside it shows the stage.
function stageBadge(v) {
  const badge = stateBadge(v);
  const blocker = v.waiting && v.waiting.blocker; // a merge held for a person: the badge names it
  if (v.status === 'REJECTED' || withdrawn(v)) badge.className = 'badge tone-off';
  else if (failed(v)) badge.className = `badge tone-${v.nextAction === 'CONTACT_SUPPORT' ? 'bad' : 'warn'}`;
  else if (blocker) {
    badge.className = 'badge tone-warn';
    badge.textContent = blocker.behind ? `${badge.textContent}: behind blocked batch #${blocker.batchId}` : blocker.label;
  }
  badge.setAttribute('data-stage-badge', v.stage);
  badge.id = 'state-badge';
  return badge;
}

function statusCard(v, codes) {
  const badge = stageBadge(v);
  const tone = badge.className.replace(/.*tone-/, '');
  return h('section', {class: `card status tone-${tone}`, 'aria-labelledby': 'status-title', id: 'status-card'},
    h('h2', {id: 'status-title', class: 'sr-only'}, 'Status'),
    h('div', {class: 'status-line'}, badge, codes ? statusBadge(v.status) : null),
    h('p', {class: 'next-text', id: 'next-action-text'}, linkify(v.nextActionText || '')),
    codes ? h('p', {class: 'small', id: 'current-step'}, 'Current step: ', h('strong', {}, stepName(v.step)), v.step && v.step.name ? h('span', {class: 'muted'}, ` (${v.step.name})`) : null) : null,
    h('p', {class: 'links'},
      v.mr ? externalLink(v.mr.url, `Merge request !${v.mr.id}`) : h('span', {class: 'muted'}, 'No merge request yet'),
      v.pipeline ? externalLink(v.pipeline.url, `Pipeline #${v.pipeline.id}`) : null,
      v.batchId ? h('span', {}, `Batch #${v.batchId}`) : null,
      ticket(v)),
    v.nextAction === 'REAPPLY' ? h('p', {}, h('a', {href: `/?target=${encodeURIComponent(v.targetKey)}`, class: 'button'}, 'Apply again')) : null);
}

// ticket is the approval ticket the request was sent with: a link when bindery can build one
// (approval.ticketURL), else its id.
function ticket(v) {
  if (!v.ticket) return null;
  const words = `Approval ticket ${v.ticket.id}`;
  return v.ticket.url ? externalLink(v.ticket.url, words) : h('span', {id: 'ticket'}, words);
}

// stageTrack is the merge-queue view: every stage of the way, done ones ticked, the current one
// highlighted with its live duration (and the pipeline during CI), a failure marked where it
// stopped.
function stageTrack(v) {
  const way = stagesOfFlow(v);
  const here = way.indexOf(v.stage);
  const spent = Object.fromEntries((v.stages || []).map((s) => [s.stage, s]));
  const finished = v.stage === 'effect' || v.stage === 'revoked';
  return h('ol', {class: 'stage-track', id: 'stage-track', 'aria-label': 'Stages'}, way.map((stage, i) => {
    let state = i < here ? 'done' : i === here ? 'current' : 'todo';
    if (i === here && failed(v)) state = 'failed';
    if (i === here && (v.status === 'REJECTED' || withdrawn(v))) state = 'failed';
    if (i === here && finished) state = 'done current';
    const s = spent[stage];
    let when = null;
    if (s && (i < here || state === 'current' || state === 'failed')) {
      when = state === 'current' && moving(v) ? `${duration(s.durationNs || 0)} so far` : duration(s.durationNs || 0);
    }
    return h('li', {class: state, 'data-stage': stage, 'aria-current': i === here ? 'step' : null},
      h('span', {class: 'stage-name'}, stageName(stage)),
      when ? h('span', {class: 'stage-time small muted'}, when) : null,
      stage === 'ci' && v.pipeline && i <= here ? externalLink(v.pipeline.url, `#${v.pipeline.id}`) : null);
  }));
}

// failureCard says what failed, where, with the links to look at and the notes bindery left
// (the failing pipeline, a bisection), instead of a "why is it waiting" for a finished failure;
// then the ways out the reader has.
function failureCard(v, ways) {
  const entries = v.timeline || [];
  const last = entries[entries.length - 1];
  const bisection = entries.filter((e) => e.note && /bisect/i.test(e.note));
  return h('section', {class: 'card failure', 'aria-labelledby': 'failure-title', id: 'failure'},
    h('h2', {id: 'failure-title'}, v.nextAction === 'CONTACT_SUPPORT' ? 'What failed' : 'Where it stopped'),
    h('dl', {class: 'pairs'},
      h('dt', {}, 'Stage'), h('dd', {}, stageName(v.stage)),
      h('dt', {}, 'Step'), h('dd', {}, stepName(v.step)),
      last && last.note ? [h('dt', {}, 'What bindery saw'), h('dd', {}, linkify(last.note))] : null,
      last && last.cause ? [h('dt', {}, 'Cause (operators)'), h('dd', {class: 'small'}, last.cause)] : null,
      v.pipeline ? [h('dt', {}, 'Pipeline'), h('dd', {}, externalLink(v.pipeline.url, `Pipeline #${v.pipeline.id}`))] : null,
      v.failedJob ? [h('dt', {}, 'Failed job'), h('dd', {id: 'failed-job'}, v.failedJob.url
        ? externalLink(v.failedJob.url, `Job ${v.failedJob.name} #${v.failedJob.id}`)
        : `Job ${v.failedJob.name} #${v.failedJob.id}`)] : null,
      v.mr ? [h('dt', {}, 'Merge request'), h('dd', {}, externalLink(v.mr.url, `Merge request !${v.mr.id}`))] : null,
      bisection.length ? [h('dt', {}, 'Bisection'), h('dd', {}, bisection.map((e) => h('p', {class: 'small'}, linkify(e.note))))] : null,
      h('dt', {}, 'Since'), h('dd', {}, last ? time(last.at) : '—')),
    ways);
}

// decisionCard shows the approvers' decision of a rejected request: who decided and what they
// wrote, as the approval system sent them.
function decisionCard(v) {
  const entries = (v.timeline || []).filter((e) => e.step && e.step.code === 10009);
  const decision = entries.length ? entries[entries.length - 1] : null;
  if (!decision) return null;
  return h('section', {class: 'card decision', 'aria-labelledby': 'decision-title', id: 'decision'},
    h('h2', {id: 'decision-title'}, 'The approvers\' decision'),
    h('blockquote', {}, linkify(decision.note || 'Rejected by the approvers.')),
    h('p', {class: 'muted small'}, time(decision.at)));
}

function waitingCard(v, action, forOps) {
  const w = v.waiting;
  const rows = [
    ['Stage', stageName(w.stage)],
    ['Waiting for', w.waitingFor ? h('span', {id: 'waiting-for'}, linkify(w.waitingFor)) : '—'],
    ['Since', h('span', {}, time(w.since), ` (${since(w.since)})`)],
  ];
  const b = w.blocker;
  if (b) {
    // Who must act, and where: the merge request to open.
    rows.push([b.behind ? 'Held behind' : 'Blocked', h('span', {id: 'blocker'}, b.behind ? `batch #${b.batchId}, blocked since ` : 'since ', time(b.since),
      b.mr ? [' — ', externalLink(b.mr.url, `open merge request !${b.mr.id}`)] : null)]);
  }
  if (w.batchId && !(b && b.behind)) rows.push(['Batch', `#${w.batchId}`]); // behind: not the batch carrying it
  if (w.position) {
    // Not "next" while a blocked car holds the project: nothing is batched before it is cleared.
    const after = b && b.behind ? ` — ${w.ahead ? `${w.ahead} ahead, ` : ''}held behind blocked batch #${b.batchId}` : w.ahead ? ` — ${w.ahead} ahead` : ' — next';
    rows.push(['Place in line', h('span', {id: 'place'}, `${ordinal(w.position)}${after}`)]);
  }
  if (w.heldUntil) rows.push(['Batched by', h('span', {id: 'held-until'}, time(w.heldUntil), h('span', {class: 'muted small block'}, 'at the latest: a batch waits a little for more requests to share its pipeline'))]);
  if (w.approvalTakes) rows.push(['Approvals usually', h('span', {id: 'approval-takes'}, w.approvalTakes)]);
  if (w.car) {
    // Its car in the project's merge train, and the cars that merge before it.
    rows.push(['Merge train', h('span', {id: 'car'}, `car ${w.car.position} of ${w.car.of}`, w.car.position === 1 ? h('span', {class: 'muted'}, ' — merges next') : null)]);
    const ahead = w.car.ahead || [];
    if (ahead.length) {
      rows.push(['Cars ahead', h('ul', {class: 'members', id: 'cars-ahead'}, ahead.map((c) => h('li', {'data-car-ahead': c.batchId},
        `Batch #${c.batchId} `, c.mr ? externalLink(c.mr.url, `MR !${c.mr.id}`) : null, ' ', pipelineBadge(c.pipeline))))]);
    }
  }
  if (w.estimate) {
    rows.push(['Estimated merge', h('span', {id: 'estimate'},
      // A late merge says when it was expected, not "around now" (the basis says why it is late).
      h('strong', {}, w.estimate.words), w.estimate.mergeAt ? [w.estimate.words.startsWith('later than') ? ' (expected at ' : ' (around ', time(w.estimate.mergeAt), ')'] : null,
      h('span', {class: 'muted small block'}, w.estimate.basis))]);
  }
  // bindery's own scheduling (a free worker, its next look) is an operator's matter while the
  // approvers decide: a requester reads what the approvers take.
  const work = forOps || w.stage !== 'approval' ? bindery(w) : null;
  if (work) rows.push(['bindery', work]);
  return h('section', {class: 'card waiting', 'aria-labelledby': 'waiting-title', id: 'waiting'},
    h('h2', {id: 'waiting-title'}, 'Why is it waiting?'),
    h('dl', {class: 'pairs'}, rows.map(([k, val]) => [h('dt', {}, k), h('dd', {}, val)])), action);
}

// bindery says what bindery itself does about the request now, when it is to act: its next step
// runs, waits for a free worker, or is due at a time (the next look at a pipeline or rebase).
function bindery(w) {
  if (w.running) return h('span', {class: 'work running'}, 'working on it now');
  if (w.nextCheckAt) return h('span', {class: 'work'}, 'looks again at ', time(w.nextCheckAt));
  if (w.lane) return h('span', {class: 'work queued'}, w.queuedBehind ? `next in line after ${w.queuedBehindMore ? 'more than ' : ''}${w.queuedBehind} other task${w.queuedBehind === 1 && !w.queuedBehindMore ? '' : 's'}` : 'next in line for a free worker');
  return null;
}

// timeline lists the steps; the last one runs "so far" unless the request has settled. Each step
// is told in words; its status code only to an operator (codes).
function timeline(entries, settled, codes) {
  if (!entries.length) return h('p', {class: 'muted'}, 'No steps recorded yet.');
  return h('ol', {class: 'timeline', id: 'timeline'}, entries.map((e, i) =>
    h('li', {class: i === entries.length - 1 ? 'current' : null},
      h('div', {class: 'tl-head'}, h('strong', {}, stepName(e.step)), codes ? [' ', statusBadge(e.status)] : null),
      h('div', {class: 'muted small'}, time(e.at), i < entries.length - 1 ? ` · took ${duration(e.durationNs)}` : settled ? '' : ` · ${duration(e.durationNs)} so far`),
      e.note ? h('p', {class: 'small note'}, linkify(e.note)) : null,
      e.cause ? h('p', {class: 'small muted cause'}, 'Cause (operators): ', e.cause) : null)));
}

/** stages draws per-stage latency as bars relative to the longest stage. */
export function stages(list, live = true) {
  if (!list.length) return h('p', {class: 'muted'}, 'No stage has started yet.');
  const max = Math.max(1, ...list.map((s) => s.durationNs || 0));
  return h('ul', {class: 'bars', id: 'stages'}, list.map((s) => h('li', {},
    h('span', {class: 'bar-label'}, stageName(s.stage)),
    h('span', {class: 'bar-track', 'aria-hidden': 'true'}, h('span', {class: `bar${!s.done && live ? ' running' : ''}`, style: {width: `${Math.max(2, (100 * (s.durationNs || 0)) / max)}%`}})),
    h('span', {class: 'bar-value'}, duration(s.durationNs || 0), !s.done && live ? ' so far' : ''))));
}

function details(v) {
  return h('dl', {class: 'pairs details'},
    h('dt', {}, 'Reason'), h('dd', {}, v.reason || '—'),
    h('dt', {}, 'Flow'), h('dd', {}, v.flow || '—'),
    h('dt', {}, 'Requested'), h('dd', {}, time(v.createdAt)),
    h('dt', {}, 'Last change'), h('dd', {}, time(v.updatedAt)),
    v.expiresAt && v.status === 'VALIDATED' ? [h('dt', {}, 'Expires'), h('dd', {'data-expires': ''}, time(v.expiresAt), ' ', h('span', {class: 'muted'}, daysLeft(v.expiresAt)))] : null,
    h('dt', {}, 'Operation id'), h('dd', {}, h('code', {}, v.operationId)));
}

// driftCard: the drift check found this binding's file removed or edited in the config repository
// by somebody outside bindery (docs/drift.md) — what is deployed is what the repository holds.
function driftCard(d) {
  return h('section', {class: 'card notice tone-bad', id: 'drift-card', role: 'status', 'data-drift': d.kind, 'data-drift-restoring': d.restoring ? 'true' : null, 'aria-labelledby': 'drift-title'},
    h('h2', {id: 'drift-title'}, d.kind === 'missing' ? 'Removed outside bindery' : 'Changed outside bindery'),
    h('p', {}, d.text));
}
