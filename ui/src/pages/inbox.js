// Demo approval inbox: the tickets the approval simulator holds. Deciding one makes the
// simulator send the real signed callback to bindery, exactly as the external system would.
import {h, swap, empty, describeError} from '../dom.js';
import {request} from '../api.js';
import {liveIndicator} from '../poll.js';
import {pollSimulator} from '../simulator.js';
import {time} from '../format.js';

export function mount(root, ctx) {
  ctx.title('Approval inbox');
  const live = liveIndicator();
  const notice = h('div', {'aria-live': 'polite'});
  const region = h('div', {});
  root.append(
    h('div', {class: 'title-row'}, h('h1', {}, 'Approval inbox'), live.el),
    h('p', {class: 'lead'}, h('span', {class: 'demo-tag'}, 'demo'), ' This stands in for the external approval system. Approving or rejecting sends its signed callback to bindery.'),
    notice, region);
  if (!ctx.me.demo) {
    swap(region, empty(h('p', {}, 'The approval inbox exists in demo mode only. In production, approvers use the approval system.')));
    return null;
  }

  let tickets = null;
  function render() {
    const pending = tickets.filter((t) => t.status === 'PENDING');
    const decided = tickets.filter((t) => t.status !== 'PENDING');
    swap(region,
      h('h2', {}, `Waiting for a decision (${pending.length})`),
      pending.length ? h('ul', {class: 'tickets', id: 'pending-tickets'}, pending.map(ticket)) : empty(h('p', {}, 'Nothing to decide. Submit a request on the ', h('a', {href: '/'}, 'Apply'), ' page and its ticket appears here.')),
      decided.length ? [h('h2', {}, 'Decided'), h('ul', {class: 'tickets decided'}, decided.slice(0, 30).map(ticket))] : null);
  }

  // What an approver typed stays while the list refreshes (by ticket).
  const comments = new Map();

  function ticket(t) {
    let decision = null;
    if (t.status === 'PENDING') {
      const id = `comment-${t.id}`;
      const comment = h('textarea', {id, rows: 2, maxlength: 2000, 'data-focus': id, 'data-comment': t.id,
        placeholder: 'Optional: why (the requester reads it)'});
      comment.value = comments.get(t.id) || '';
      comment.addEventListener('input', () => comments.set(t.id, comment.value));
      decision = [
        h('label', {for: id, class: 'small'}, 'Comment for the requester'), comment,
        h('div', {class: 'actions'},
          decide(t, 'APPROVED', 'Approve', 'primary', comment),
          decide(t, 'REJECTED', 'Reject', 'danger', comment))];
    }
    return h('li', {class: 'card ticket', 'data-ticket': t.id, 'data-operation-id': t.operationId},
      h('div', {class: 'ticket-head'},
        h('strong', {}, t.subject), ' asks for ', h('code', {}, t.targetKey),
        t.status !== 'PENDING' ? [' ', h('span', {class: `badge tone-${t.status === 'APPROVED' ? 'ok' : 'off'}`}, t.status)] : null),
      t.reason ? h('blockquote', {}, t.reason) : null,
      h('p', {class: 'muted small'}, 'Opened ', time(t.createdAt), t.decidedAt ? [', decided ', time(t.decidedAt)] : null,
        t.decidedBy ? ` by ${t.decidedBy}` : null, ' · ',
        h('a', {href: `/requests/${encodeURIComponent(t.operationId)}`}, 'request page')),
      t.comment ? h('p', {class: 'small', 'data-decision-comment': t.id}, 'Comment: ', t.comment) : null,
      decision);
  }

  function decide(t, decision, label, cls, comment) {
    const b = h('button', {type: 'button', class: cls, 'data-focus': `${decision}-${t.id}`, 'data-decide': decision},
      label, h('span', {class: 'sr-only'}, ` ${t.targetKey} for ${t.subject}`));
    b.addEventListener('click', async () => {
      for (const other of b.parentNode.querySelectorAll('button')) other.disabled = true;
      comment.disabled = true;
      try {
        // The approval system sends who decided and their comment in its callback.
        await request('POST', `/sim/approvals/${encodeURIComponent(t.id)}/decide`, {decision, decidedBy: ctx.me.identity, comment: comment.value.trim()});
        comments.delete(t.id);
        swap(notice, h('div', {class: 'notice tone-ok', role: 'status'}, h('p', {}, `${decision === 'APPROVED' ? 'Approved' : 'Rejected'}: ${t.subject} → ${t.targetKey}. `,
          h('a', {href: `/requests/${encodeURIComponent(t.operationId)}`}, 'Follow the request'))));
      } catch (err) {
        swap(notice, h('div', {class: 'notice tone-bad', role: 'alert'}, h('p', {}, describeError(err))));
        // The list is drawn again only when it changes: the ticket stays decidable as it is.
        for (const other of b.parentNode.querySelectorAll('button')) other.disabled = false;
        comment.disabled = false;
      }
      p.now();
    });
    return b;
  }

  const p = pollSimulator(region, live, {path: '/sim/approvals', what: 'the approval tickets',
    absent: 'The approval simulator is not running on this server.',
    take: (page) => { tickets = ((page && page.items) || []).slice().sort((a, b) => String(b.createdAt).localeCompare(String(a.createdAt))); },
    render});
  return () => p.stop();
}
