// The simulators' own pages (the approval inbox, the mailbox) read a /sim/ route every 2 s. A
// server without that simulator answers 404: the page says so once and stops asking.

import {h, swap, loading, empty, errorBox, busyReading} from './dom.js';
import {get} from './api.js';
import {poll} from './poll.js';

/**
 * pollSimulator shows `what` loading in region, then calls take(data) with each answer of path
 * that differs from the one shown and render() unless the user is reading a selection in region. Until take has had an answer,
 * a failure shows an error box with a retry; `absent` is the sentence for a 404. Returns the
 * poll ({stop, now}).
 */
export function pollSimulator(region, live, {path, what, absent, take, render}) {
  let had = false;
  let shown = null; // the answer on screen: an answer that brings nothing new is not drawn again
  swap(region, loading(what));
  const p = poll(() => get(path), (data) => {
    const seen = JSON.stringify(data);
    live.ok();
    // Drawing the same list again would move the caret out of a half-typed comment every 2 s
    // (and a node under the pointer away from a click); a reader's selection holds it too.
    if (had && seen === shown) return;
    take(data);
    had = true;
    if (busyReading(region)) return;
    shown = seen;
    render();
  }, (err) => {
    live.failed();
    if (err.status === 404) {
      p.stop();
      swap(region, empty(h('p', {}, absent)));
      return;
    }
    if (!had) swap(region, errorBox(err, () => p.now()));
  }, 2000);
  return p;
}
