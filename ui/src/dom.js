// A few DOM helpers instead of a framework: h() builds elements, swap() replaces a region's
// content while keeping keyboard focus on the "same" control (by its data-focus key), so a
// live refresh every few seconds never yanks focus away from someone using the keyboard.

/**
 * h('button', {class: 'primary', onclick: fn, disabled: true}, 'Save') → <button …>Save</button>
 * Attributes: on* take functions; style takes an object of CSS properties ({width: '5%'}, set
 * one by one: the content policy refuses style attributes); true/false toggle boolean
 * attributes; null/undefined skip.
 * Children: strings, numbers, nodes, arrays of those; null/false/undefined skip.
 */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') {
      el.addEventListener(k.slice(2), v);
    } else if (k === 'style' && typeof v === 'object') {
      for (const [prop, val] of Object.entries(v)) el.style.setProperty(prop, String(val));
    } else if (v === true) {
      el.setAttribute(k, '');
    } else {
      el.setAttribute(k, String(v));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    if (Array.isArray(c)) append(el, c);
    else el.append(c instanceof Node ? c : String(c));
  }
}

/** swap replaces the content of region, keeping focus on the element with the same data-focus. */
export function swap(region, ...children) {
  const active = document.activeElement;
  const key = active && region.contains(active) ? active.getAttribute('data-focus') : null;
  region.replaceChildren();
  append(region, children);
  if (key) {
    const again = region.querySelector(`[data-focus="${CSS.escape(key)}"]`);
    if (again) again.focus({preventScroll: true});
  }
}

/**
 * busyReading reports that the reader is selecting text inside region: a live refresh then
 * waits, so a selection is not wiped out from under the mouse.
 */
export function busyReading(region) {
  const sel = document.getSelection();
  return !!sel && !sel.isCollapsed && region.contains(sel.anchorNode);
}

/** announce tells screen readers about a change (status moved) once, politely. */
export function announce(text) {
  let el = document.getElementById('announcer');
  if (!el) {
    el = h('div', {id: 'announcer', class: 'sr-only', 'aria-live': 'polite', 'aria-atomic': 'true'});
    document.body.append(el);
  }
  el.textContent = text;
}

/** link is an in-app link; the router handles the click without a page load. */
export function link(href, ...children) {
  return h('a', {href}, ...children);
}

/** externalLink opens outside the app (MR, pipeline) in a new tab. */
export function externalLink(href, ...children) {
  return h('a', {href, target: '_blank', rel: 'noopener noreferrer', class: 'external'}, ...children);
}

/** The standard states of a region: loading, empty, error (with a retry button). */
export function loading(what) {
  return h('p', {class: 'state loading', role: 'status'}, h('span', {class: 'spinner', 'aria-hidden': 'true'}), `Loading ${what}…`);
}

export function empty(...children) {
  return h('div', {class: 'state empty'}, ...children);
}

export function errorBox(err, retry) {
  return h('div', {class: 'state error', role: 'alert'},
    h('p', {}, describeError(err)),
    err && err.requestId ? h('p', {class: 'muted small'}, 'Request id: ', h('code', {}, err.requestId)) : null,
    retry ? h('button', {type: 'button', onclick: retry, 'data-focus': 'retry'}, 'Try again') : null);
}

/** describeError turns an API error into a sentence a requester can act on. */
export function describeError(err) {
  if (!err) return 'Something went wrong.';
  switch (err.code) {
    case 'NETWORK': return 'bindery cannot be reached. Check your connection; this page keeps trying.';
    case 'UNAUTHENTICATED': return 'You are not signed in. Sign in and reload the page.';
    case 'ACCESS_DENIED': return 'Access denied.';
    case 'NOT_FOUND': return err.message || 'Not found.';
    case 'RATE_LIMITED': return `Too many requests. Try again ${err.retryAfter ? `in ${err.retryAfter} s` : 'in a moment'}.`;
    case 'UNAVAILABLE': return 'A service bindery depends on is down. Try again in a moment.';
    case 'INTERNAL': return 'bindery hit an internal error. Try again; if it keeps happening, tell the operators the request id below.';
  }
  return err.message || `Request failed (${err.status}).`;
}
