// The simulators' own pages (the approval inbox, the mailbox) read a /sim/ route every 2 s. A
// server without that simulator answers 404: the page says so once and stops asking.

import {h, swap, loading, empty, errorBox, busyReading} from './dom.js';
import {get} from './api.js';
import {poll} from './poll.js';

/**
 * pollSimulator shows `what` loading in region, then calls take(data) with each answer of path
 * and render() unless the user is reading a selection in region. Until take has had an answer,
 * a failure shows an error box with a retry; `absent` is the sentence for a 404. Returns the
 * poll ({stop, now}).
 */
export function pollSimulator(region, live, {path, what, absent, take, render}) {
  let had = false;
  swap(region, loading(what));
  const p = poll(() => get(path), (data) => {
    take(data);
    had = true;
    live.ok();
    if (!busyReading(region)) render();
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
